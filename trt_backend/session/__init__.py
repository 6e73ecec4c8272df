"""The stitched Session: its options, feeds, given and derived profiles, saved plans, and build
folders (the read side without Session, the write side with it)."""
