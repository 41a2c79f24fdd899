"""One module per group of endpoints; `jobqueue.api.app.ROUTE_HANDLERS` lists them."""
