"""Against real servers: recorded and public runs, parity fixtures, calibration."""
