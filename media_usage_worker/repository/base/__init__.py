"""What every feature's statements stand on: engines and transactions, the tables, the database
clock, ids, upserts, the guard predicates, JSON row sets, stored text and planner statistics."""
