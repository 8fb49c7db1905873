"""The columnar MetadataImage, MetadataDelta, the loader and the image writer."""
