"""The broker role: lifecycle (registration, heartbeats, controlled shutdown), forwarding of the
clients' controller APIs, Metadata answers, epoch offsets."""
