"""Record batches v2, control records and metadata-record codecs (pure twins of csrc/)."""
