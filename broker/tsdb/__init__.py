"""TDengine data model: types, rows entries, schemaless ingestion, vectorised encoding, views."""
