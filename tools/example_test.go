package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/tools"
)

// serveWeather serves the function tool "get_weather" on
// foundryq.tools.get_weather: the workers call it when a run's model calls
// the function, and send its output to the model. Run as many instances
// as you like: they share the calls.
func serveWeather(nc *nats.Conn) (*tools.Service, error) {
	return tools.Serve(nc, "get_weather", func(ctx context.Context, call tools.Call) (string, error) {
		var args struct {
			City string `json:"city"`
		}
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return "", tools.Error{Code: "400", Description: "arguments: " + err.Error()}
		}
		// ctx ends if the run is cancelled or the worker gives the call up.
		return fmt.Sprintf(`{"city":%q,"temp_c":21}`, args.City), nil
	}, tools.WithDescription("the weather in a city"))
}

// Example serves a tool and calls it as a worker does.
func Example() {
	srv, err := natsembed.Start(natsembed.Config{InProcess: true})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	svc, err := serveWeather(nc)
	if err != nil {
		panic(err)
	}
	defer svc.Stop()

	// What a worker sends when the model calls get_weather.
	req := nats.NewMsg(events.Names{}.ToolSubject("get_weather"))
	req.Header.Set(events.HeaderToolRunID, "run_1")
	req.Header.Set(events.HeaderToolCallID, "call_1")
	req.Header.Set(events.HeaderToolName, "get_weather")
	req.Header.Set(events.HeaderToolDeadline, time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
	req.Data = []byte(`{"city":"Paris"}`)
	reply, err := nc.RequestMsg(req, 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(req.Subject)
	fmt.Println(string(reply.Data))

	req.Data = []byte(`not json`)
	reply, err = nc.RequestMsg(req, 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(reply.Header.Get("Nats-Service-Error-Code"), reply.Header.Get("Nats-Service-Error"))
	// Output:
	// foundryq.tools.get_weather
	// {"city":"Paris","temp_c":21}
	// 400 arguments: invalid character 'o' in literal null (expecting 'u')
}
