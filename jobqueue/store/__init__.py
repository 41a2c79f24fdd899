"""The only code that speaks SQL: each module mirrors one file of ``sql/queries`` and returns Calls;
`migrate` runs the Alembic revisions (``migrations/``, ``sql/migrations``)."""
