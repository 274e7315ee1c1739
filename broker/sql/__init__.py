"""The SQL front: parsing, expression compilation, execution."""
