"""TDengine data model: types, rows entries, schemaless parsing, vectorised encoding, the
catalog cache. The layer under `broker.sql`; it imports nothing else of the broker."""
