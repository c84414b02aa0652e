"""The partition layer between the engine and the HTTP gateway: partition roles, leader epochs,
the in-sync replica set, the high watermark, acks, follower fetching, cluster metadata, the
controller and request routing. It never imports `gateway`."""
