-- The demo's rounds (issue 16 item 1, docs D17): when the demo space's next round of
-- sample traffic is due (ms). Each instance of a multi-instance install ticks on its own;
-- only the one whose compare-and-set advances this column sends the round. NULL: none
-- sent yet, due now.
ALTER TABLE spaces ADD COLUMN demo_next_round_at BIGINT;
