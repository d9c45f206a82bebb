-- Events the workers published (intents of the action publish_event that succeeded).
SELECT count(*) FROM oncebox.intents WHERE action = 'publish_event' AND status = 'succeeded'
