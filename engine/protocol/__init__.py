"""Kafka wire facts shared by every role: older API versions."""
