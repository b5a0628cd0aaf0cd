package secrets_test

import (
	"encoding/json"
	"fmt"

	"github.com/foundryq/foundryq/internal/secrets"
)

func ExampleResolver_ResolveTools() {
	env := map[string]string{"FOUNDRYQ_SECRET_CRM_TOKEN": "Bearer s3cr3t-value"}
	r, err := secrets.NewResolver(secrets.Config{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Hosts:     map[string][]string{"crm-token": {"crm.example.com"}},
	})
	if err != nil {
		panic(err)
	}
	tool := json.RawMessage(`{"type":"mcp","server_url":"https://crm.example.com/mcp","headers":{"Authorization":{"secret":"crm-token"}}}`)
	out, err := r.ResolveTools([]json.RawMessage{tool})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out[0]))

	// The same secret may not go to another server.
	other := json.RawMessage(`{"type":"mcp","server_url":"https://elsewhere.example.net/mcp","headers":{"Authorization":{"secret":"crm-token"}}}`)
	_, err = r.ResolveTools([]json.RawMessage{other})
	fmt.Println(err)
	// Output:
	// {"headers":{"Authorization":"Bearer s3cr3t-value"},"server_url":"https://crm.example.com/mcp","type":"mcp"}
	// secrets: tools[0].headers.Authorization: secret "crm-token": secret not allowed for this server: not to this server_url's host
}

func ExampleRedactRequest() {
	body := `{"run_id":"r1","model":"m","input":"hi","tools":[{"type":"mcp","server_url":"https://crm.example.com/mcp","headers":{"Authorization":"Bearer s3cr3t"}}]}`
	fmt.Println(string(secrets.RedactRequest([]byte(body))))
	// Output:
	// {"input":"hi","model":"m","run_id":"r1","tools":[{"headers":{"Authorization":"REDACTED"},"server_url":"https://crm.example.com/mcp","type":"mcp"}]}
}
