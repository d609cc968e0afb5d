"""The usage index itself: what a refresh reads of its entries, the rows it writes, and every
read of "where is this media used"."""
