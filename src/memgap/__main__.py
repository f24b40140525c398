from memgap.cli import entry

entry()
