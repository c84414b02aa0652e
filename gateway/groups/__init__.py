"""Consumer groups: the coordinator, its assignors and its errors. Domain code: no HTTP here."""
