"""Byzantine-robust methods: Byz-VR-MARINA, Byz-EF21, Byz-DASHA-PAGE, RoSDHB."""
