"""Composition root: controller and broker roles, network transport, CLI, metrics."""
