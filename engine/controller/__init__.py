"""The quorum controller: the image every controller holds, the active controller's write
handlers, cluster / replication / feature control."""
