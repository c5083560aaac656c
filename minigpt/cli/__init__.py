"""The `minigpt` command line: the Typer app (app), a module for each larger command, help and completion
(help), the process around it (process); docs/design.md lists them. Only this subpackage imports typer."""
