"""What the API does, over a database session: one module per resource. Routers stay thin."""
