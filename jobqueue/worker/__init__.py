"""Running jobs: the claim loop (runner), handler execution, batched acks, leases and registry."""
