-- Tracing: the W3C trace context (`traceparent`) of the request that submitted a
-- job, so its segments, step calls and events join the submitter's trace. NULL when
-- the submitter sent none and the node traces nothing.
ALTER TABLE workflow_run
    ADD COLUMN trace_context text
        CONSTRAINT workflow_run_trace_context_length CHECK (char_length(trace_context) <= 512);

COMMENT ON COLUMN workflow_run.trace_context IS
    'The W3C traceparent of the submitting request: the parent of every segment span; sent on with each step call and each event record.';
