%% @doc Mnesia's dirty writes to an EC table, replicated as `async_ec' writes.
%%
%% An EC table is a `local_content' table whose local copy its process opens for Mnesia's
%% dirty commit path ({@link hm_ec_mnesia}). Mnesia's own dirty calls share that path:
%% `mnesia:dirty_write/1,2', `dirty_delete/1,2', `dirty_delete_object/1,2',
%% `dirty_update_counter/2,3', and the writes inside `mnesia:async_dirty/1' and
%% `sync_dirty/1', change this node's copy, and nothing else would see them. Stock Mnesia has
%% no hook to refuse them without refusing the table's own writes too; it does report every
%% change of a table to its subscribers (`mnesia:subscribe({table, Tab, detailed})'), from
%% the process that made it, before the call returns. This process subscribes to every EC
%% table with a copy here and turns each change it did not make itself into the EC
%% operation a write inside `async_ec' would have issued (see {@link ops/3}): a write, a
%% delete, a `delete_object'. The copy here already shows the change; the operation makes
%% the table's CRDT take it, on every copy, as any `async_ec' write.
%%
%% The table's own writes are told apart by their process: a table's process calls
%% {@link watch/1} before it writes, and is one of this process's own until it ends (its
%% changes reach this process before the notice of its end, so none is taken for a user's).
%% A `ram_copies' copy with nothing else on commit is still written straight into its ETS
%% table ({@link hm_ec_store_mnesia}), which Mnesia does not report: this subscription is
%% the one commit work the direct path ignores ({@link is_only_subscriber/1}).
%%
%% Operations are submitted in the order Mnesia reported the changes, by a worker process,
%% so that this process never waits for a table's process (which may be calling
%% {@link watch/1}). Tables replicated DottedDB's way are left out (their copies are their
%% processes' state, see docs/limits.md). Every second the subscriptions are checked again:
%% a table loaded here meanwhile, or subscribed to before Mnesia restarted, is subscribed
%% to again.
-module(hm_ec_dirty).
-behaviour(gen_server).

-export([start_link/0, watch/1, is_only_subscriber/1, ops/3]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(REFRESH_MS, 1000).

-type event() :: {write | delete, atom(), tuple(), [tuple()], term()}.

%%% ---------------------------------------------------------------- API

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Subscribe to the changes of EC table `Tab' here, and count the calling process
%% (the table's) as one whose changes are the table's own. Returns at once when this
%% process is not running (a core driven without the application).
-spec watch(atom()) -> ok.
watch(Tab) ->
    case whereis(?MODULE) of
        undefined -> ok;
        _ ->
            try gen_server:call(?MODULE, {watch, Tab, self()}, infinity)
            catch exit:_ -> ok                                  % stopping meanwhile
            end
    end.

%% @doc Whether Mnesia's commit work `Work' for a table (its `commit_work' list) is this
%% process's subscription and nothing else.
-spec is_only_subscriber(list()) -> boolean().
is_only_subscriber([{subscribers, [], [Pid]}]) -> Pid =:= whereis(?MODULE);
is_only_subscriber(_) -> false.

%% @doc The EC operations that carry the change `Event' Mnesia reported on EC table `Tab'
%% (EC options `Opts'), pure: `{Table, {Key, Op}}' to submit. A partitioned table's record
%% written to a fragment other than its own (a dirty write names the table, and Mnesia
%% writes the fragment of that name) goes to its own fragment and is removed from the
%% one it was written to; `Frag' says where a key or record belongs.
-spec ops(atom(), event(), #{record := fun((tuple()) -> atom()),
                             key := fun((term()) -> [atom()])}) ->
          [{atom(), {term(), hm_ec_table:op()}}].
ops(Tab, {write, Tab, Rec, _Old, _Tid}, #{record := Frag}) when tuple_size(Rec) > 2 ->
    Key = element(2, Rec),
    case Frag(Rec) of
        Tab -> [{Tab, {Key, {write, Rec}}}];
        Own -> [{Own, {Key, {write, Rec}}}, {Tab, {Key, {delete_object, Rec}}}]
    end;
ops(Tab, {delete, Tab, {Tab, Key}, _Old, _Tid}, #{key := Frags}) ->
    [{F, {Key, delete}} || F <- lists:usort([Tab | Frags(Key)])];
ops(Tab, {delete, Tab, Rec, _Old, _Tid}, #{record := Frag}) when tuple_size(Rec) > 2 ->
    [{F, {element(2, Rec), {delete_object, Rec}}} || F <- lists:usort([Tab, Frag(Rec)])];
ops(_Tab, _Event, _Frag) -> [].

%%% ---------------------------------------------------------------- gen_server

-spec init([]) -> {ok, map()}.
init([]) ->
    Worker = spawn_link(fun worker/0),
    erlang:send_after(?REFRESH_MS, self(), refresh),
    {ok, #{own => #{}, worker => Worker}}.

-spec handle_call(term(), gen_server:from(), map()) -> {reply, ok, map()}.
handle_call({watch, Tab, Pid}, _From, S = #{own := Own}) ->
    ok = subscribe(Tab),
    Own1 = case Own of
               #{Pid := _} -> Own;
               _ -> Own#{Pid => erlang:monitor(process, Pid)}
           end,
    {reply, ok, S#{own := Own1}}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_Msg, S) -> {noreply, S}.

-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info({mnesia_table_event, Event}, S = #{own := Own, worker := Worker}) ->
    _ = case Event of
            {Kind, Tab, _, _, {dirty, Pid}} when (Kind =:= write orelse Kind =:= delete),
                                                 not is_map_key(Pid, Own) ->
                Worker ! {change, Tab, Event};
            _ -> ok                      % the table's own, or not a change of a record
        end,
    {noreply, S};
handle_info({'DOWN', _, process, Pid, _}, S = #{own := Own}) ->
    {noreply, S#{own := maps:remove(Pid, Own)}};
handle_info(refresh, S) ->
    _ = [subscribe(T) || T <- hm_membership:mnesia_list(local_tables)],
    erlang:send_after(?REFRESH_MS, self(), refresh),
    {noreply, S};
handle_info(_Msg, S) -> {noreply, S}.

%%% ---------------------------------------------------------------- internals

%% Subscribe to `Tab' unless subscribed already, or it is not an EC table replicated by
%% its operations.
subscribe(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, #{server := _}} -> ok;                           % DottedDB's: not ours
        {ok, _} ->
            Subscribed = try mnesia:table_info(Tab, subscribers)
                         catch exit:_ -> []
                         end,
            _ = lists:member(self(), Subscribed)
                orelse mnesia:subscribe({table, Tab, detailed}),
            ok;
        error -> ok
    end.

%% The worker: submits the operations of each reported change, in order.
worker() ->
    receive
        {change, Tab, Event} ->
            try submit(Tab, Event)
            catch Class:Reason ->
                    logger:warning("hypermnesia: a dirty change of ~p was not replicated: ~0p",
                                   [Tab, {Class, Reason}])
            end,
            worker()
    end.

submit(Tab, Event) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, Opts} ->
            {Base, BaseOpts} = base(Tab, Opts),
            Frag = #{record => fun(R) -> hm_ec_frag:record_fragment(Base, R, BaseOpts) end,
                     key => fun(K) -> key_fragments(Base, K, BaseOpts) end},
            lists:foreach(
              fun({T, KeyOp}) ->
                      case hm_ec_server:submit(T, KeyOp, async) of
                          ok -> ok;
                          {error, Reason} ->
                              logger:warning("hypermnesia: a dirty change of ~p was not "
                                             "replicated: ~0p", [Tab, Reason])
                      end
              end, ops(Tab, Event, Frag));
        error -> ok                                           % deleted meanwhile
    end.

%% The table a fragment belongs to, with its options.
base(Tab, #{frag := #{base := Base}}) ->
    case hm_ec_registry:ec_options(Base) of
        {ok, BaseOpts} -> {Base, BaseOpts};
        error -> {Tab, #{}}
    end;
base(Tab, Opts) -> {Tab, Opts}.

key_fragments(Base, Key, Opts) ->
    case hm_ec_frag:key_fragments(Base, Key, Opts) of
        {error, _} -> [];
        Frags -> Frags
    end.
