-- ping
SELECT 1;
