-- A worker has work (or is stopping): submits need not wake it.
DELETE FROM oncebox.waiting_workers WHERE worker = $1
