// A Durable Object has one alarm; work that wants to be woken by a time asks for "no later than"
// that time, keeping an alarm already due earlier. Inside the alarm handler getAlarm() is null
// unless something set a new alarm since the handler started (an RPC that ran meanwhile), so a
// handler that reschedules itself this way keeps that earlier wake-up instead of overwriting it.

/** Sets the alarm to `atMs` unless one is already set at or before it. */
export async function wakeNoLaterThan(storage: DurableObjectStorage, atMs: number): Promise<void> {
  const current = await storage.getAlarm();
  if (current === null || current > atMs) await storage.setAlarm(atMs);
}
