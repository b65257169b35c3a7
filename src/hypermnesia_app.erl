%% @doc The hypermnesia application: starts the supervisor of the node's EC server and
%% membership server. It never starts Mnesia (Mnesia is not among its `applications'):
%% the application that uses Hypermnesia creates its schema, on disc if it wants one, and
%% starts Mnesia before or after Hypermnesia; the EC server takes the EC tables up once
%% Mnesia has loaded them. `hypermnesia:start/0' starts both, for shells and scripts.
%%
%% The application does not start on a Mnesia without the internals EC tables rely on
%% (`{unsupported_mnesia, MnesiaVsn, What}'; see `hm_ec_mnesia:self_check/0'): the functions
%% are checked always, the shape of Mnesia's state when Mnesia already runs.
-module(hypermnesia_app).
-behaviour(application).
-export([start/2, stop/1]).

-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    case hm_ec_mnesia:self_check() of
        ok -> hypermnesia_sup:start_link();
        {error, _} = E -> E
    end.

-spec stop(term()) -> ok.
stop(_State) -> ok.
