"""What editors decide: approvals, review items and their resolution, previews,
the review board."""
