/**
 * The gateway's event vocabulary (docs/api.md, "Event types"; `GET /v1/event-types`), each
 * with its description. A test checks it against the gateway's own list.
 */
export const EVENT_TYPES: Array<{ name: string; value: string; description: string }> = [
	{
		name: 'Approval Pending',
		value: 'approval_pending',
		description: 'The draft is verified and waits for an editor',
	},
	{ name: 'Approved', value: 'approved', description: 'An editor approved the version' },
	{ name: 'Cancelled', value: 'cancelled', description: 'The job was cancelled' },
	{
		name: 'Changes Requested',
		value: 'changes_requested',
		description: "An editor requested changes (reason: the editor's note)",
	},
	{
		name: 'Commented',
		value: 'commented',
		description: 'An editor commented (reason: the comment)',
	},
	{
		name: 'Needs Attention',
		value: 'needs_attention',
		description: 'The job needs a person (failed, unknown outcome, under review, stalled)',
	},
	{
		name: 'Published',
		value: 'published',
		description: 'WordPress holds the post published (read back)',
	},
	{ name: 'Revoked', value: 'revoked', description: 'An approval was revoked' },
	{
		name: 'Scheduled',
		value: 'scheduled',
		description: 'Approved and scheduled: WordPress publishes the post at its date',
	},
];
