"""In-memory storage, network and whole-cluster simulator for the raft core (tests only)."""
