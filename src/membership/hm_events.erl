%% @doc Hypermnesia's operational events on this node: each is written to the log as a
%% structured report (logger metadata `domain => [hypermnesia]') and sent to the processes
%% that subscribed to it, as `{hypermnesia_event, Event, Info}'.
%%
%% The events (`Info' always carries `node' and `time', the system time in milliseconds):
%% <ul>
%% <li>`partition': a member (a node of Mnesia's schema) became unreachable: a netsplit, or
%% the node stopped. `#{peer}'.</li>
%% <li>`reconnect': a member is reachable again. `#{peer, down_ms}' (`down_ms' is
%% `undefined' when this node never saw it go down).</li>
%% <li>`mnesia_rejoin': Mnesia, split after a partition, runs with these members again.
%% `#{peers}'.</li>
%% <li>`catch_up': after a member came back, an EC table copy here and the member's copy have
%% exchanged what each lacked. `#{table, peer, duration_ms, ops_received, ops_sent,
%% conflicts_resolved}':
%% operations this copy applied from others during the catch-up, and operations of other
%% origins the member acknowledged during it (both include writes made meanwhile).</li>
%% <li>`state_transfer': a copy without state (added, or restarted empty) installed a
%% member's state and takes writes; the copies of a new table report one each, with 0 rows.
%% `#{table, rows, duration_ms}'.</li>
%% </ul>
%% Each is also emitted as a `telemetry' event when that library is there
%% ({@link hm_telemetry}).
%%
%% A subscription is per process and per node: it receives the events of this node only, and
%% ends when the process exits or calls {@link unsubscribe/1}. {@link notify/2} never blocks
%% the caller: the events reach subscribers through this module's process, and when it is not
%% running (the application is stopping) they are only logged.
%%
%% Invariants: every event notified is logged once; a subscriber gets each event it
%% subscribed to once, in the order they were notified, and nothing after it unsubscribed.
-module(hm_events).
-behaviour(gen_server).

-export([start_link/0, subscribe/1, unsubscribe/1, notify/2, events/0, format/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).
-export_type([event/0]).

-type event() :: partition | reconnect | mnesia_rejoin | catch_up | state_transfer.

-define(EVENTS, [partition, reconnect, mnesia_rejoin, catch_up, state_transfer]).

%%% ---------------------------------------------------------------- API

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc The events there are.
-spec events() -> [event()].
events() -> ?EVENTS.

%% @doc Send the calling process `{hypermnesia_event, Event, Info}' for every later `Event'
%% on this node (`all': every event). Subscribing twice to an event delivers it once.
%% `{error, {bad_event, Event}}' for an unknown event, `{error, {node_not_running, node()}}'
%% when Hypermnesia does not run here.
-spec subscribe(event() | all) -> ok | {error, term()}.
subscribe(Event) -> request({subscribe, Event, self()}, Event).

%% @doc Stop receiving `Event' (`all': every event).
-spec unsubscribe(event() | all) -> ok | {error, term()}.
unsubscribe(Event) -> request({unsubscribe, Event, self()}, Event).

request(Req, Event) ->
    case Event =:= all orelse lists:member(Event, ?EVENTS) of
        false -> {error, {bad_event, Event}};
        true ->
            try gen_server:call(?MODULE, Req)
            catch exit:{noproc, _} -> {error, {node_not_running, node()}}
            end
    end.

%% @doc Log `Event' and pass it to its subscribers. Returns at once.
-spec notify(event(), map()) -> ok.
notify(Event, Info0) ->
    Info = Info0#{node => node(), time => erlang:system_time(millisecond)},
    logger:notice(#{hypermnesia_event => Event, info => Info},
                  #{domain => [hypermnesia], report_cb => fun ?MODULE:format/1}),
    gen_server:cast(?MODULE, {notify, Event, Info}).

%% @doc The log line of an event's report (logger's `report_cb').
-spec format(map()) -> {io:format(), [term()]}.
format(#{hypermnesia_event := partition, info := #{peer := P}}) ->
    {"hypermnesia: ~p is unreachable (partition seen)", [P]};
format(#{hypermnesia_event := reconnect, info := #{peer := P, down_ms := Ms}}) ->
    {"hypermnesia: ~p is reachable again (down ~p ms)", [P, Ms]};
format(#{hypermnesia_event := mnesia_rejoin, info := #{peers := Ps}}) ->
    {"hypermnesia: Mnesia runs with ~p again", [Ps]};
format(#{hypermnesia_event := catch_up, info := I = #{table := T, peer := P}}) ->
    {"hypermnesia: ~p caught up with ~p in ~p ms (~p operations received, ~p sent, ~p "
     "conflicts resolved)",
     [T, P, maps:get(duration_ms, I), maps:get(ops_received, I), maps:get(ops_sent, I),
      maps:get(conflicts_resolved, I, 0)]};
format(#{hypermnesia_event := state_transfer, info := I = #{table := T}}) ->
    {"hypermnesia: ~p installed a state transfer (~p rows) in ~p ms",
     [T, maps:get(rows, I), maps:get(duration_ms, I)]};
format(Report) ->
    {"hypermnesia: ~0p", [Report]}.

%%% ---------------------------------------------------------------- gen_server

%% State: subscribers, Pid => {MonitorRef, [event()]}.
-spec init([]) -> {ok, map()}.
init([]) -> {ok, #{}}.

-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({subscribe, Event, Pid}, _From, Subs) ->
    {Ref, Evs} = case Subs of
                     #{Pid := Sub} -> Sub;
                     _ -> {erlang:monitor(process, Pid), []}
                 end,
    {reply, ok, Subs#{Pid => {Ref, lists:usort(expand(Event) ++ Evs)}}};
handle_call({unsubscribe, Event, Pid}, _From, Subs) ->
    case Subs of
        #{Pid := {Ref, Evs}} ->
            case Evs -- expand(Event) of
                [] -> erlang:demonitor(Ref, [flush]), {reply, ok, maps:remove(Pid, Subs)};
                Rest -> {reply, ok, Subs#{Pid := {Ref, Rest}}}
            end;
        _ -> {reply, ok, Subs}
    end;
handle_call(_, _From, Subs) ->
    {reply, {error, unknown_request}, Subs}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast({notify, Event, Info}, Subs) ->
    _ = [Pid ! {hypermnesia_event, Event, Info}
         || {Pid, {_, Evs}} <- maps:to_list(Subs), lists:member(Event, Evs)],
    ok = hm_telemetry:emit(Event, Info),
    {noreply, Subs};
handle_cast(_, Subs) ->
    {noreply, Subs}.

-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info({'DOWN', _, process, Pid, _}, Subs) ->
    {noreply, maps:remove(Pid, Subs)};
handle_info(_, Subs) ->
    {noreply, Subs}.

expand(all) -> ?EVENTS;
expand(Event) -> [Event].
