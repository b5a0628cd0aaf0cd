// Package secrets keeps credentials off the bus and out of every output.
//
// Secret references. A run request's MCP tools may name a secret instead of
// carrying it: a header value or the tool's "authorization" written as
// {"secret": "crm-token"} is replaced by the worker, just before the request
// goes to Foundry, with the value of the secret "crm-token" from the
// worker's own secret store: a file named crm-token in a directory (as
// Kubernetes mounts a Secret) or, failing that, the environment variable
// FOUNDRYQ_SECRET_CRM_TOKEN. So producers never put raw tokens on NATS, and
// the runs stream, dead letters and logs never hold them.
//
// A reference is honoured only for the hosts the operator lets that secret
// go to (Config.Hosts): without that, anyone allowed to submit a run could
// have the worker send the CRM token to a server of their choosing by
// naming it in server_url. Such a tool must be an MCP tool holding only
// the fields of one, spelt as documented (Server_URL or serverUrl is
// refused, not read); every destination it names (server_url,
// connector_id, tunnel_id, project_connection_id) must be allowed: an
// https server_url whose host is one of the secret's, ids listed as they
// are. Refusals say what is wrong without naming the secret's hosts, the
// directory or the variables (every submitter reads them in run state);
// Config.Logger gets those at debug level.
//
// Redaction. RedactRequest and RedactTools replace credential-bearing
// fields of a request body (tool header values of any JSON shape,
// authorization, fields named like api_key, password or token, passwords
// and query values of URLs) with Redacted, for dead letters, logs and any
// other output.
// RedactURL hides the password or token of a NATS or HTTP URL. Scrub,
// ScrubError and NewWriter remove known secret values from text as a last
// line of defence (errors from libraries can quote a URL with its
// password).
package secrets
