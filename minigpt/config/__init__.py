"""The run's configuration: typed sections with each field's rules in its metadata (schema, fields),
the choices the command line shares (choices), and YAML files with KEY=VALUE overrides (files).
Standard library and PyYAML only."""
