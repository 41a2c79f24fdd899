"""The one gateway to PostgreSQL: `gateway` runs `Call`s and opens every connection and pool,
`queries` loads the named SQL of ``sql/queries``, `paths` finds the SQL in a checkout or a wheel.

What a statement is belongs to `jobqueue.store`; this package only runs it.
"""
