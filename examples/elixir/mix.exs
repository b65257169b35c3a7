# An Elixir project that uses Hypermnesia as a dependency built by rebar3.
# Run it with `make elixir-example` from the repository root, or here with
#   MIX_REBAR3=$(command -v rebar3) mix run -e HmExample.main
defmodule HmExample.MixProject do
  use Mix.Project

  def project do
    [
      app: :hm_example,
      version: "0.1.0",
      elixir: "~> 1.14",
      deps: [{:hypermnesia, path: "../..", manager: :rebar3}]
    ]
  end

  # Mnesia is included, not started: the application creates its schema first
  # (see docs/guide/09-in-your-application.md).
  def application do
    [extra_applications: [:logger], included_applications: [:mnesia]]
  end
end
