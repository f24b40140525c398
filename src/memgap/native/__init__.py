"""memgap's in-process native helpers (C, built at install or on first use): ``installed`` gives a
library (the install's build, or one built now), ``build`` compiles."""
