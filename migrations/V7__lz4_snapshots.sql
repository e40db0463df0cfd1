-- Every job row keeps its workflow snapshot (descriptor set and all), and PostgreSQL
-- compresses it on insert. With pglz that compression was the largest single cost of
-- a submission (the bench's `submit` scenario, profiled with perf); lz4 compresses
-- several times faster at a similar size. Only rows written from now on use it; old
-- rows stay readable as they are. (PostgreSQL 14+ built with lz4, as Debian's and the
-- official images are; a server without lz4 fails this migration with its own
-- message, and the node does not start.)
ALTER TABLE workflow_run ALTER COLUMN workflow_definition SET COMPRESSION lz4;
ALTER TABLE workflow_run ALTER COLUMN input SET COMPRESSION lz4;
ALTER TABLE workflow_run ALTER COLUMN checkpoints SET COMPRESSION lz4;
ALTER TABLE workflow_run ALTER COLUMN result SET COMPRESSION lz4;
