package gateway_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/internal/testkit"
)

// The OpenAPI document is a valid OpenAPI 3.1 document (kin-openapi loads
// and validates it, every reference included), and it stands alone.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := gateway.OpenAPI()
	if _, err := contract.NewHTTPChecker(doc, nil); err != nil {
		t.Fatal(err)
	}
	var d struct {
		OpenAPI    string `json:"openapi"`
		Components struct {
			Schemas         map[string]any `json:"schemas"`
			SecuritySchemes map[string]struct {
				Type, Scheme string
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", d.OpenAPI)
	}
	for _, name := range []string{"run-request", "run-state", "event-run.completed", "cancel-reply", "input-answer", "CreateRunRequest", "ErrorBody"} {
		if d.Components.Schemas[name] == nil {
			t.Errorf("components/schemas lacks %s", name)
		}
	}
	if b := d.Components.SecuritySchemes["bearerAuth"]; b.Type != "http" || b.Scheme != "bearer" {
		t.Errorf("bearerAuth %+v", b)
	}
	if bytes.Contains(doc, []byte(`.json#`)) || bytes.Contains(doc, []byte(`"$ref": "common.json`)) {
		t.Error("the document refers to schema files: it must stand alone")
	}
}

var routePattern = regexp.MustCompile(`^[A-Z]+ /`)

// routes lists the gateway's routes as "METHOD /path", read from the
// patterns Handler registers in gateway.go (patterns without a method are
// the 405 answers of the routes above them, the /v1/ catch-all a 404; "/"
// is the console, GET only: its page and its files).
func routes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "gateway.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Handler" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			pattern, _ := strconv.Unquote(lit.Value)
			switch {
			case routePattern.MatchString(pattern):
				out = append(out, pattern)
			case pattern == "/":
				out = append(out, "GET /", "GET /{file}")
			}
			return true
		})
		return false
	})
	slices.Sort(out)
	if len(out) < 8 {
		t.Fatalf("found only routes %v in gateway.go", out)
	}
	return out
}

// Every route of the gateway is in the OpenAPI document, and every
// operation of the document is a route.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(gateway.OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range d.Paths {
		for method := range item {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	testkit.SameSet(t, documented, routes(t),
		"route %s is not in the OpenAPI document",
		"the OpenAPI document has %s, which the gateway does not serve")
}

// GET /openapi.json serves the document, without a token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := setup(t, 0)
	g := e.gateway(gateway.Config{})
	r := g.do(t, http.MethodGet, "/openapi.json", nil)
	if r.status != http.StatusOK || !bytes.Equal(r.body, gateway.OpenAPI()) {
		t.Fatalf("GET /openapi.json: %d, %d bytes", r.status, len(r.body))
	}
}

// The gateway's own response objects in the OpenAPI document have exactly
// the fields of their Go types.
func TestOpenAPIObjectsMatchGoTypes(t *testing.T) {
	t.Parallel()
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(gateway.OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]reflect.Type{
		"CreateResponse": reflect.TypeFor[gateway.CreateResponse](),
		"Error":          reflect.TypeFor[gateway.APIError](),
		"ErrorBody":      reflect.TypeFor[gateway.ErrorBody](),
		"RunList":        reflect.TypeFor[gateway.RunList](),
	} {
		var fields []string
		for i := range typ.NumField() {
			tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, tag)
		}
		var props []string
		for p := range d.Components.Schemas[name].Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: Go fields %v, OpenAPI properties %v", name, fields, props)
		}
	}
}
