"""What a program uses to talk to a cluster (MetadataClient)."""
