"""The work table: due selection, claims under a lease, completion, retry and failure, the
rescans' rows, the operator's listing, pending writes and the pace samples."""
