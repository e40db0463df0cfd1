-- A claim whose answer was lost (the connection broke after the claim statement was
-- sent) may have taken jobs no task of the node runs. The node gives those back, and
-- must give back only those: each claim statement stamps the rows it takes with a
-- nonce of the node's own, so a node whose claim went unanswered releases exactly that
-- claim's rows, never another process's that shares its worker_id (a copied config,
-- an old process in its shutdown grace).
ALTER TABLE workflow_run ADD COLUMN claim_nonce uuid;
COMMENT ON COLUMN workflow_run.claim_nonce IS
    'The nonce of the claim statement that took the row last (the node''s own, per statement): what a node whose claim went unanswered gives back by.';
