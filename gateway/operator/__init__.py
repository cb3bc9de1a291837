"""What operators run and read: doctor, metrics, the report, retention."""
