"""The `minigpt` command line: the Typer app and the process around it (app), a module for each larger
command, help and completion (help); docs/design.md lists them. Only this subpackage imports typer."""
