"""TDengine's statements and queries over the `broker.tsdb` data model: parsing, expression
compilation, execution (DDL, INSERT, SHOW), schemaless writes through Produce (`ingest`) and
TDengine topics' views evaluated in Fetch (`views`). Imports `broker.tsdb`, never the reverse;
the Kafka core uses both only through `broker.tdengine`."""
