import type {
	IAuthenticateGeneric,
	Icon,
	ICredentialTestRequest,
	ICredentialType,
	INodeProperties,
} from 'n8n-workflow';

/**
 * The gateway's base URL and a workflow token (`gateway tokens create --role workflow`).
 * Sent as `Authorization: Bearer <token>` (RFC 6750), the only way the gateway's /v1 routes
 * authenticate. The credential test calls `GET /v1/jobs?limit=1`, which needs the token
 * (`GET /healthz` does not, so it would pass with a wrong token).
 */
export class PublishingGatewayApi implements ICredentialType {
	name = 'publishingGatewayApi';

	displayName = 'Publishing Gateway API';

	icon: Icon = {
		light: 'file:../icons/gateway.svg',
		dark: 'file:../icons/gateway.dark.svg',
	};

	documentationUrl =
		'https://github.com/publishing-gateway/publishing-gateway/blob/main/n8n-nodes-publishing-gateway/README.md';

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://127.0.0.1:8000',
			placeholder: 'https://gateway.example.com',
			description: "The gateway's address, without /v1",
			required: true,
		},
		{
			displayName: 'Token',
			name: 'token',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description: 'A workflow token from "gateway tokens create --role workflow"',
			required: true,
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.token}}',
			},
		},
	};

	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.baseUrl.replace(/\\/+$/, "")}}',
			url: '/v1/jobs',
			qs: { limit: 1 },
		},
	};
}
