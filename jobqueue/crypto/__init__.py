"""Payload field-level encryption: the envelopes a value is sealed in (`envelopes`) and the key
ring of key-encryption keys (`keyring`). No I/O beyond reading the key file; the rotation of
stored values, which walks the table, is the `jobqueue keys` command (`jobqueue.cli.keys`)."""
