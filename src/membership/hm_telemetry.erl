%% @doc Hypermnesia's events ({@link hm_events}) as `telemetry' events, for applications that
%% collect metrics through the `telemetry' library (every Phoenix application does). There is
%% no dependency: when the `telemetry' module is not loadable nothing is emitted.
%%
%% Each event is `telemetry:execute(Name, Measurements, Metadata)', from the events process
%% (never in the process that made the event happen), with `Metadata' carrying `node' and,
%% where the event has them, `peer', `peers' and `table':
%% <ul>
%% <li>`[hypermnesia, partition]': `#{count => 1}'; metadata `peer'.</li>
%% <li>`[hypermnesia, reconnect]': `#{count => 1, down_ms => Ms}' (`down_ms' only when this
%% node saw the member go down); metadata `peer'.</li>
%% <li>`[hypermnesia, mnesia_rejoin]': `#{count => 1, peers => N}'; metadata `peers'.</li>
%% <li>`[hypermnesia, catch_up]': `#{duration_ms, ops_received, ops_sent,
%% conflicts_resolved}'; metadata `table', `peer'.</li>
%% <li>`[hypermnesia, state_transfer]': `#{duration_ms, rows}'; metadata `table'.</li>
%% </ul>
%% {@link event/2} is the pure mapping.
-module(hm_telemetry).

-export([emit/2, emit/3, event/2]).

%% @doc Emit `Event' with `Info' (as {@link hm_events:notify/2} gives it) through `telemetry'
%% when it is there. Never fails.
-spec emit(hm_events:event(), map()) -> ok.
emit(Event, Info) -> emit(telemetry, Event, Info).

%% @doc {@link emit/2} through module `Mod' (`telemetry', or a stand-in with `execute/3').
-spec emit(module(), hm_events:event(), map()) -> ok.
emit(Mod, Event, Info) ->
    Loaded = code:ensure_loaded(Mod) =:= {module, Mod},
    case Loaded andalso erlang:function_exported(Mod, execute, 3) of
        true ->
            {Name, Measurements, Metadata} = event(Event, Info),
            try Mod:execute(Name, Measurements, Metadata), ok
            catch _:_ -> ok
            end;
        false -> ok
    end.

%% @doc The telemetry event of a Hypermnesia event: its name, measurements (numbers only) and
%% metadata.
-spec event(hm_events:event(), map()) -> {[atom(), ...], #{atom() => number()}, map()}.
event(Event, Info) ->
    Metadata = maps:with([node, peer, peers, table], Info),
    Measurements =
        case Event of
            partition -> #{count => 1};
            reconnect -> numbers(#{count => 1}, [down_ms], Info);
            mnesia_rejoin -> #{count => 1, peers => length(maps:get(peers, Info, []))};
            catch_up ->
                numbers(#{}, [duration_ms, ops_received, ops_sent, conflicts_resolved], Info);
            state_transfer -> numbers(#{}, [duration_ms, rows], Info)
        end,
    {[hypermnesia, Event], Measurements, Metadata}.

numbers(Acc, Keys, Info) ->
    maps:merge(Acc, maps:filter(fun(_, V) -> is_number(V) end, maps:with(Keys, Info))).
