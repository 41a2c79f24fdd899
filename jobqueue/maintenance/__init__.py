"""Leader-only background services (sweeper, and later scheduler and pruner) and the elector."""
