"""Many runs: sweeps, capacity plans and where their points run."""
