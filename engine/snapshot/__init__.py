"""The LMDB snapshot store and Kafka .checkpoint export/import."""
