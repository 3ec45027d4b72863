"""PostgreSQL: fair FIFO semaphores in tables of their own, decided by the database."""
