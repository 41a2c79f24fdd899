"""Asyncio machinery the long-running parts share, with no import of jobqueue: an injectable
clock (`clock`), background tasks that may not end silently (`background`), and a cache whose
entries are reloaded before they expire (`refresh_ahead`)."""
