"""Newton-type methods with compressed Hessians: FedNL, Newton-3PC."""
