// The key "__proto__" in JSON objects used as dictionaries (plan names in EDGESTR_PLANS, a bridge
// server's prices and secret headers). JSON.parse makes it an own key like any other, but zod's
// records drop it without a word (assigning it to the plain object they build would replace that
// object's prototype): a plan so named vanished, and a capability priced under that name was
// served free. So it is refused with a clear error instead. Other members of Object.prototype
// (`constructor`, `toString`…) are ordinary names: every lookup of such a dictionary takes own
// entries only (Object.hasOwn: planLimits, priceOf).

import { z } from 'zod';

export const PROTO_KEY = '__proto__';

/** The refusal of the key, as an issue message. */
export const PROTO_KEY_MESSAGE = `"${PROTO_KEY}" cannot be used as a name here`;

/** Whether `value` is an object with an own "__proto__" key (as JSON.parse makes it). */
export const hasProtoKey = (value: unknown): boolean => typeof value === 'object' && value !== null && Object.hasOwn(value, PROTO_KEY);

/** `schema` (a record) behind a check that refuses an own "__proto__" key, which the record would drop. */
export const withoutProtoKey = <T extends z.ZodType>(schema: T) =>
  z
    .unknown()
    .superRefine((value, ctx) => {
      if (hasProtoKey(value)) ctx.addIssue({ code: 'custom', path: [PROTO_KEY], message: PROTO_KEY_MESSAGE });
    })
    .pipe(schema);
