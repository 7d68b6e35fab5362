"""Sign-based and one-bit methods: signSGD and Signum with majority vote, 1-bit Adam and 0/1
Adam."""
