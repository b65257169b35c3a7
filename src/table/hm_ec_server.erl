%% @doc The node's EC server: finds the EC tables this node holds a copy of, runs one
%% process per table ({@link hm_ec_table_server}, under {@link hm_ec_table_sup}), tells them
%% when their copy holders change, and answers node-wide calls. Operations themselves never
%% go through it: {@link submit/3} calls the table's process.
%%
%% Every second (and on {@link refresh/0}, after `create_table', `add_table_copy',
%% `del_table_copy', `delete_table' and a Mnesia re-join) it re-reads Mnesia's schema: a
%% table loaded here that is not tracked yet gets its process; one gone from this node, or
%% deleted and created again under the same name (another instance, told by Mnesia's
%% creation cookie), loses it. It watches Mnesia itself: when Mnesia stops on this node while
%% Hypermnesia runs (a crash of Mnesia alone, `mnesia:stop/0'), every table process is
%% stopped with it, and the tables are taken up again once Mnesia has loaded them (a
%% `ram_copies' copy, empty then, as a new incarnation that catches up by state transfer; a
%% `disc_copies' copy from its disc state). A message for a table that reaches this server
%% instead of the table's process is passed on, or dropped (and logged, at most once every
%% 10 s per kind) when the table is not tracked here.
-module(hm_ec_server).
-behaviour(gen_server).

-export([to_holders/4]).
-export([start_link/0, submit/3, info/0, info/1, refresh/0, tick_ms/0,
         table_pids/0, copy_holders/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(REFRESH_MS, 1000).
-define(PASS_ON_MS, 5000).

-type mode() :: async | sync.

%%% ---------------------------------------------------------------- API

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Apply an operation on `Key' of EC table `Tab' and broadcast it. `async' returns
%% once applied; `sync' once every reachable copy holder has applied it (and, for a disc
%% table, once the local write is on disc). With a copy here, it is applied here. Without
%% one (a node outside the table's copy holders, or outside the holders of a fragment of a
%% partitioned table), or while the copy here is still catching up, it is passed to a
%% reachable holder; when none answers it is kept here as a hint ({@link hm_ec_hints}) and
%% handed off once a holder is back. Writes passed on keep this node's order: a holder takes
%% one only once it has delivered those taken before from this node (session order,
%% {@link hm_ec_hints}). A write passed on that times out may be applied twice
%% (at the holder that timed out, and at the next): the same record written twice, which
%% reads cannot tell apart. Exits with `{noproc, _}' when Hypermnesia is not running here.
-spec submit(atom(), {term(), hm_ec_table:op()}, mode()) -> ok | {error, term()}.
submit(Tab, KeyOp, Mode) ->
    Name = hm_ec_table_server:name(Tab),
    Local = case whereis(Name) of
                undefined ->
                    case hm_ec_frag:is_local(Tab) of
                        true ->
                            %% not tracked yet (just created, or just loaded): look now
                            case gen_server:call(?MODULE, {table, Tab}, infinity) of
                                {ok, Pid} -> call_table(Tab, Pid, KeyOp, Mode);
                                error -> {error, {not_ec_table, Tab}}
                            end;
                        false -> {error, {not_ec_table, Tab}}
                    end;
                Pid -> call_table(Tab, Pid, KeyOp, Mode)
            end,
    case Local of
        {error, {Why, Tab}} when Why =:= not_ec_table; Why =:= syncing ->
            case hm_ec_registry:is_ec_table(Tab) of
                true -> pass_on(Tab, KeyOp, Mode);
                false -> Local
            end;
        {error, {not_applied, _}} ->
            %% the copy here was removed under the write (a partitioned table's fragment
            %% moving away): nothing was applied or sent, a holder takes it
            case hm_ec_frag:is_local(Tab) of
                false -> pass_on(Tab, KeyOp, Mode);
                true -> Local
            end;
        Done -> Done
    end.

%% With a session on `Tab' (this node passed writes on to holders: hm_ec_hints), the copy
%% here takes the write only once it has delivered them; else it is passed on as well.
%% Hints kept here for `Tab' (made while the copy here was catching up) leave first: the
%% write is passed on behind them.
call_table(Tab, Pid, KeyOp, Mode) ->
    try
        case hm_ec_hints:pending(Tab) =:= [] andalso hm_ec_hints:session(Tab) of
            false -> {error, {syncing, Tab}};
            After when map_size(After) =:= 0 ->
                hm_ec_table_server:submit(Pid, KeyOp, Mode, infinity);
            After ->
                case hm_ec_table_server:submit(Pid, KeyOp, Mode, After, infinity) of
                    {ok, Dot} -> hm_ec_hints:note(Tab, Dot);
                    {error, {behind, Tab}} -> {error, {syncing, Tab}};
                    Other -> Other
                end
        end
    catch
        %% gone, or stopped before it took the write (the copy leaving this node: a table
        %% process finishes what it began before it stops): nothing was applied, a holder
        %% takes it
        exit:{noproc, _} -> {error, {not_ec_table, Tab}};
        exit:{normal, _} -> {error, {not_ec_table, Tab}};
        exit:{shutdown, _} -> {error, {not_ec_table, Tab}};
        exit:{{shutdown, _}, _} -> {error, {not_ec_table, Tab}}
    end.

%% To a reachable holder; older hints of the table first (through this server, which hands
%% them off in order); a hint when no holder answers.
pass_on(Tab, KeyOp, Mode) ->
    case hm_ec_hints:pending(Tab) of
        [] ->
            case to_holders(Tab, KeyOp, Mode) of
                ok -> ok;
                {error, _} = Refused -> Refused;
                unreachable -> gen_server:call(?MODULE, {pass_on, Tab, KeyOp, Mode},
                                               infinity)
            end;
        _ -> gen_server:call(?MODULE, {pass_on, Tab, KeyOp, Mode}, infinity)
    end.

%% The copy here first, when there is one (hints made while it was catching up go to it once
%% it is ready: it may be the fragment's only holder), then the others.
to_holders(Tab, KeyOp, Mode) ->
    to_holders([node() || hm_ec_frag:is_local(Tab)] ++ hm_ec_frag:holders(Tab), Tab, KeyOp, Mode).

%% @doc Hand write `KeyOp' on `Tab' to the copies on `Nodes', in order, until one takes it:
%% `ok' (its dot noted in this node's session), `{error, Reason}' for what every holder
%% refuses and for a `sync' write a holder applied but whose wait for the other copies timed
%% out (`{sync_timeout, Nodes}': it is applied, so it goes to no other holder), or
%% `unreachable' when none took it.
-spec to_holders([node()], atom(), {term(), hm_ec_table:op()}, async | sync) ->
          ok | {error, term()} | unreachable.
to_holders([], _Tab, _KeyOp, _Mode) -> unreachable;
to_holders([H | Hs], Tab, KeyOp, Mode) ->
    %% a sync write's holder answers within its own wait (sync_timeout at worst): the call
    %% outlasts it, so a slow answer is not taken for a holder that did not take it
    Timeout = case Mode of
                  async -> ?PASS_ON_MS;
                  sync -> hm_ec_table:sync_timeout_ms() + ?PASS_ON_MS
              end,
    Server = {hm_ec_table_server:name(Tab), H},
    try hm_ec_table_server:submit(Server, KeyOp, Mode, hm_ec_hints:session(Tab), Timeout) of
        {ok, Dot} -> hm_ec_hints:note(Tab, Dot);
        ok -> ok;                           % a sync_ec write a dotted copy took
        %% a holder behind this node's earlier writes refuses (hm_ec_hints, session order):
        %% the next is tried, and with none the write is kept as a hint
        {error, {behind, _}} -> to_holders(Hs, Tab, KeyOp, Mode);
        %% what every holder refuses (a record write on a CRDT table, a CRDT operation on a
        %% table of records or one its type does not have) is refused here too, never a hint
        {error, {Why, _}} = Refused when Why =:= crdt_table; Why =:= not_crdt_table -> Refused;
        {error, {bad_op, _, _}} = Refused -> Refused;
        %% applied there, only the wait for the other copies timed out: another holder
        %% would apply it a second time
        {error, {sync_timeout, _}} = Applied -> Applied;
        {error, _} -> to_holders(Hs, Tab, KeyOp, Mode)
    catch exit:_ -> to_holders(Hs, Tab, KeyOp, Mode)
    end.

%% Hand off the hints on every table, oldest first, as far as a holder takes them; then
%% `New' (hm_ec_hints:pass_on/4).
handoff() -> lists:foreach(fun(Tab) -> _ = handoff(Tab, none, async) end, hm_ec_hints:tables()).

handoff(Tab, New, Mode) ->
    Try = fun(KeyOp, Acc) -> {to_holders(Tab, KeyOp, Mode), Acc} end,
    {Done, Outcome, _} = hm_ec_hints:pass_on(hm_ec_hints:pending(Tab), New, Try, none),
    [hm_ec_hints:remove(Tab, Seq) || {_, Seq} <- Done],
    case Outcome of
        kept -> ok = hm_ec_hints:add(Tab, New), hm_ec_hints:kept_answer(Tab, Mode);
        {error, _} = Refused -> Refused;
        _ -> ok
    end.

%% @doc Node-wide status: EC tables and, per table, what {@link info/1} gives;
%% `queued_ops' sums the members' operations waiting in the tables' queues.
-spec info() -> map().
info() -> gen_server:call(?MODULE, info, 30000).

%% @doc Status of one EC table on this node.
-spec info(atom()) -> map() | {error, term()}.
info(Tab) -> gen_server:call(?MODULE, {info, Tab}, 30000).

%% @doc Look for new EC tables and copy holders now (otherwise every second).
-spec refresh() -> ok.
refresh() -> gen_server:call(?MODULE, refresh).

%% @doc The period of the tables' ticks, in ms.
-spec tick_ms() -> pos_integer().
tick_ms() -> 250.

%% @doc The processes of this node's EC tables.
-spec table_pids() -> [pid()].
table_pids() -> [Pid || {_, Pid, _, _} <- supervisor:which_children(hm_ec_table_sup),
                        is_pid(Pid)].

%% @doc The nodes holding a copy of `Tab', from Mnesia's schema.
-spec copy_holders(atom()) -> [node()].
copy_holders(Tab) ->
    lists:usort(mnesia:table_info(Tab, ram_copies) ++ mnesia:table_info(Tab, disc_copies)).

%%% ---------------------------------------------------------------- gen_server

-spec init([]) -> {ok, map()}.
init([]) ->
    ok = hm_ec_hints:init(),
    ok = hm_ec_versions:init(),
    Ref = make_ref(),
    erlang:send_after(?REFRESH_MS, self(), {tick, Ref}),
    S = adopt(#{tables => #{}, ticks => 0, tick_ref => Ref, mnesia => undefined,
                drops => #{}, rejoins => undefined}),
    {ok, refresh_tables(S)}.

%% Table processes that outlived a previous server (it is restarted by the supervisor) are
%% tracked again.
adopt(S) ->
    lists:foldl(fun(Pid, Acc) ->
                        case table_info(Pid) of
                            #{table := Tab} -> track(Tab, Pid, cookie(Tab), Acc);
                            _ -> Acc
                        end
                end, S, table_pids()).

-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({table, Tab}, _From, S) ->
    S1 = refresh_tables(S),
    case maps:get(tables, S1) of
        #{Tab := {Pid, _, _}} -> {reply, {ok, Pid}, S1};
        _ -> {reply, error, S1}
    end;
handle_call(info, _From, S = #{tables := Ts}) ->
    Infos = maps:fold(fun(Tab, {Pid, _, _}, Acc) ->
                              try Acc#{Tab => {hm_ec_table_server:info(Pid),
                                               hm_ec_table_server:queued(Pid)}}
                              catch exit:_ -> Acc                  % stopped meanwhile
                              end
                      end, #{}, Ts),
    {reply, #{node => node(),
              queued_ops => lists:sum([Q || {_, Q} <- maps:values(Infos)]),
              hints => hm_ec_hints:count(),
              tables => maps:map(fun(_, {I, _}) -> I end, Infos)}, S};
handle_call({info, Tab}, _From, S0) ->
    S = case hm_ec_registry:is_ec_table(Tab) of
            true -> S0;
            false -> refresh_tables(S0)            % deleted meanwhile: forget it now
        end,
    S1 = case maps:is_key(Tab, maps:get(tables, S)) of
             true -> S;
             false -> refresh_tables(S)
         end,
    case maps:get(tables, S1) of
        #{Tab := {Pid, _, _}} ->
            case table_info(Pid) of
                I = #{} -> {reply, I, S1};
                _ -> {reply, {error, {not_ec_table, Tab}}, S1}
            end;
        _ -> {reply, {error, {not_ec_table, Tab}}, S1}
    end;
handle_call({pass_on, Tab, KeyOp, Mode}, _From, S) ->
    {reply, handoff(Tab, KeyOp, Mode), S};
handle_call(refresh, _From, S) ->
    {reply, ok, refresh_tables(S)};
handle_call(Req, _From, S) ->
    {reply, {error, {unknown_request, Req}}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(Msg, S) ->
    {noreply, drop({unknown_cast, Msg}, S)}.

-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info(Env, S = #{tables := Ts}) when element(1, Env) =:= hm_ec ->
    case hm_ec_wire:open(Env) of
        {ok, Tab, FromNode, _, _} ->
            case Ts of
                #{Tab := {Pid, _, _}} -> Pid ! Env, {noreply, S};
                _ -> {noreply, drop({unknown_table, Tab, FromNode}, S)}
            end;
        {error, Why} -> {noreply, drop({bad_envelope, Why}, S)}
    end;
handle_info({tick, Ref}, S = #{tick_ref := Ref, ticks := N}) ->
    %% only this server's own timer ticks (a stray `tick' must not start another chain)
    erlang:send_after(?REFRESH_MS, self(), {tick, Ref}),
    handoff(),
    ok = hm_ec_versions:refresh(),
    {noreply, refresh_tables(subscribe_rejoins(S#{ticks := N + 1}))};
handle_info({hypermnesia_event, mnesia_rejoin, _}, S) ->
    %% Mnesia runs with members again after a partition: their copies are members again
    {noreply, refresh_tables(S)};
handle_info({'DOWN', Ref, process, _, _}, S = #{rejoins := Ref}) ->
    {noreply, S#{rejoins := undefined}};
handle_info({'DOWN', _, process, Pid, _}, S = #{mnesia := {Pid, _}}) ->
    {noreply, mnesia_gone(S)};
handle_info({'DOWN', Ref, process, _, _}, S = #{tables := Ts}) ->
    %% a table process ended: its table is taken up again at the next refresh if it is here
    {noreply, S#{tables := maps:filter(fun(_, {_, R, _}) -> R =/= Ref end, Ts)}};
handle_info(Msg, S) ->
    {noreply, drop({unknown_message, Msg}, S)}.

%% Subscribe to the membership layer's `mnesia_rejoin' events (hm_events, started after
%% this server: tried at every tick until it runs, and again once it restarted), so that
%% the tables are taken up again as soon as Mnesia runs with the members it was split from,
%% not at the next tick.
subscribe_rejoins(S = #{rejoins := undefined}) ->
    case whereis(hm_events) of
        undefined -> S;
        Pid ->
            Ref = monitor(process, Pid),
            case hm_events:subscribe(mnesia_rejoin) of
                ok -> S#{rejoins := Ref};
                _ -> demonitor(Ref, [flush]), S
            end
    end;
subscribe_rejoins(S) -> S.

drop(What, S = #{drops := D}) -> S#{drops := hm_ec_table_server:log_drop(What, D)}.

%%% ---------------------------------------------------------------- tables

track(Tab, Pid, Cookie, S = #{tables := Ts}) ->
    S#{tables := Ts#{Tab => {Pid, erlang:monitor(process, Pid), Cookie}}}.

untrack(Tab, S = #{tables := Ts}) ->
    case Ts of
        #{Tab := {Pid, Ref, _}} ->
            erlang:demonitor(Ref, [flush]),
            ok = hm_ec_table_sup:stop_table(Pid),
            S#{tables := maps:remove(Tab, Ts)};
        _ -> S
    end.

%% Mnesia stopped on this node: every table copy goes with it (a ram copy's contents are
%% gone; a disc copy is read back from disc when Mnesia is back).
mnesia_gone(S = #{tables := Ts}) ->
    [logger:notice("hypermnesia: Mnesia stopped here; ~p is taken up again when it is back",
                   [Tab]) || Tab <- maps:keys(Ts)],
    S1 = lists:foldl(fun untrack/2, S, maps:keys(Ts)),
    S1#{mnesia := undefined}.

%% The running Mnesia, watched: a new one (Mnesia restarted between two refreshes) means
%% every table process of the old one holds a stale state.
watch_mnesia(S = #{mnesia := M}) ->
    case {whereis(mnesia_sup), M} of
        {undefined, undefined} -> S;
        {undefined, _} -> mnesia_gone(S);
        {Pid, {Pid, _}} -> S;
        {Pid, undefined} -> S#{mnesia := {Pid, erlang:monitor(process, Pid)}};
        {Pid, {_Old, Ref}} ->
            erlang:demonitor(Ref, [flush]),
            (mnesia_gone(S))#{mnesia := {Pid, erlang:monitor(process, Pid)}}
    end.

%% EC tables with a local copy, and their copy holders, from Mnesia's schema.
refresh_tables(S0) ->
    S = #{tables := Ts} = watch_mnesia(S0),
    Local = hm_membership:mnesia_list(local_tables),
    %% A table already tracked keeps its process (its log, its incarnation) whatever Mnesia
    %% is doing, re-join included, until Mnesia says it is gone from this node, or that it is
    %% another instance (deleted and created again under the same name since: its state
    %% would be the old table's); a new one is taken up once Mnesia has loaded it.
    Gone = [Tab || {Tab, {_, _, Cookie}} <- maps:to_list(Ts),
                   gone(Tab, Local) orelse replaced(Tab, Cookie)],
    S1 = lists:foldl(fun untrack/2, S, Gone),
    maps:foreach(fun(Tab, {Pid, _, _}) ->
                         try copy_holders(Tab) of
                             Ms -> hm_ec_table_server:set_members(Pid, Ms)
                         catch _:_ -> ok           % deleted meanwhile, or Mnesia stopping
                         end
                 end, maps:get(tables, S1)),
    Ec = [{Tab, Opts} || Tab <- Local, not maps:is_key(Tab, maps:get(tables, S1)),
                         {ok, Opts} <- [hm_ec_registry:ec_options(Tab)]],
    lists:foldl(fun({Tab, Opts = #{meta := M, log := L}}, Acc) ->
                        case mnesia:wait_for_tables([Tab, M, L], 0) of
                            ok -> take_up(Tab, Opts, Acc);
                            _ -> Acc
                        end
                end, S1, Ec).

replaced(Tab, Cookie) ->
    case cookie(Tab) of
        Cookie -> false;
        {{_, _, _}, _} -> true;                    % another instance's cookie
        _ -> false                                 % not readable now: keep the state
    end.

%% The table instance's cookie (Mnesia's, made at create_table), or `unknown'.
cookie(Tab) ->
    try mnesia:table_info(Tab, cookie)
    catch _:_ -> unknown
    end.

%% A table process's own report, or `gone' when it stopped.
table_info(Pid) ->
    try hm_ec_table_server:info(Pid)
    catch exit:_ -> gone
    end.

%% Gone for sure: Mnesia runs and the table is not among this node's tables any more.
gone(Tab, Local) ->
    mnesia:system_info(is_running) =:= yes andalso not lists:member(Tab, Local).

take_up(Tab, Opts, S) ->
    Cookie = mnesia:table_info(Tab, cookie),
    case hm_ec_table_sup:start_table(Tab, Opts) of
        {ok, Pid} -> track(Tab, Pid, Cookie, S);
        {error, Reason} ->
            logger:notice("hypermnesia: ~p not taken up yet: ~0p", [Tab, Reason]),
            S
    end.
