package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

// TestCheckModel: a model the gateway lists passes, one it does not fails naming those it has,
// in either protocol; a gateway without a list passes every model; the list is read once.
func TestCheckModel(t *testing.T) {
	gw := modeltest.NewServer(t, linkModelKey)
	for _, g := range []Gateway{
		{Provider: ProviderOpenAI, BaseURL: gw.OpenAIBaseURL()},
		{Provider: ProviderAnthropic, BaseURL: gw.AnthropicBaseURL()},
	} {
		rt, err := g.route(linkModelKey)
		if err != nil {
			t.Fatal(err)
		}
		a := &Agent{}
		gw.SetModels()
		if err := a.checkModel(context.Background(), rt, "anything"); err != nil {
			t.Fatalf("%s, a gateway without a list: %v", g.Provider, err)
		}
		a = &Agent{}
		gw.SetModels("scripted-1", "scripted-2")
		before := gw.Listings()
		if err := a.checkModel(context.Background(), rt, "scripted-2"); err != nil {
			t.Fatalf("%s, a listed model: %v", g.Provider, err)
		}
		err = a.checkModel(context.Background(), rt, "gpt-9")
		if err == nil || !strings.Contains(err.Error(), `model "gpt-9" is not offered by the gateway (its GET /models lists scripted-1, scripted-2)`) {
			t.Fatalf("%s, an unlisted model: %v", g.Provider, err)
		}
		if n := gw.Listings() - before; n != 1 {
			t.Fatalf("%s: the list was read %d times for two checks; want once", g.Provider, n)
		}
	}
	gw.SetModels()
}
